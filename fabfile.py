"""kimi-ops: deploy a vLLM OpenAI server to a GPU host over SSH, and prove it came up.

Run ``fab --list`` for the tasks. The logic lives in ``kimi_ops`` (pure) and ``tasks`` (I/O).
fabric.yaml beside this file installs the fleet executor (several hosts run concurrently).
"""

from tasks import ns

__all__ = ["ns"]
