"""Files kimi-ops uploads to the host and runs there (stdlib only)."""
