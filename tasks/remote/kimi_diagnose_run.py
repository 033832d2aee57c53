#!/usr/bin/env python3
"""kimi-ops log diagnosis, run ON the host by `fab diagnose` (stdlib only, uploaded to run_dir).

``kimi_diagnose.py`` beside this file is the kimi_ops.diagnose package joined into one
self-contained stdlib module by tasks/bundle.py. The log is read where it lies, in 1 MiB
pieces, so a log of gigabytes is diagnosed without sending it over SSH; every 128 MiB a
progress line goes to stderr. Prints one JSON line:
``{"diagnosis": {...}, "bytes": N}`` or ``{"missing": PATH}``.

Usage: python3 kimi_diagnose_run.py LOG [CONTEXT_JSON]
"""

from __future__ import annotations

import json
import os
import sys

PROGRESS_EVERY = 128 << 20  # bytes between two progress lines


def main(argv: list[str]) -> int:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import kimi_diagnose  # noqa: PLC0415  (beside this file, on the host)

    log = argv[1]
    context = json.loads(argv[2]) if len(argv) > 2 else {}
    diagnoser = kimi_diagnose.LogDiagnoser(context)
    size = 0
    try:
        with open(log, "rb") as fh:
            total = os.fstat(fh.fileno()).st_size
            while True:
                chunk = fh.read(1 << 20)
                if not chunk:
                    break
                size += len(chunk)
                diagnoser.feed(chunk)
                if size % PROGRESS_EVERY == 0:  # on stderr, which fab shows as it comes
                    mib = 1 << 20
                    print(
                        f"diagnose: read {size // mib} of {total // mib} MiB on the host",
                        file=sys.stderr,
                        flush=True,
                    )
    except FileNotFoundError:
        print(json.dumps({"missing": log}))
        return 0
    print(json.dumps({"diagnosis": diagnoser.diagnosis().to_dict(), "bytes": size}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
