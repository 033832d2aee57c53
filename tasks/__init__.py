"""kimi-ops Fabric tasks: the imperative shell around :mod:`kimi_ops`.

``ns`` is the task collection ``fabfile.py`` exposes; the ``kimi`` configuration section gets its
defaults here (``kimi_ops.defaults.DEFAULTS``), so fabric.yaml, ~/.fabric.yaml or ``fab -f FILE``
only need the keys they change.
"""

from __future__ import annotations

import copy

from invoke import Collection

from kimi_ops.defaults import DEFAULTS

from . import cli, config_files, demo, masking, router

config_files.install()  # a missing -f file, a misspelled section, a YAML error: one line
masking.install_logging()  # fab -d: Invoke logs the config files (secrets too) after this import

ns = Collection()
for _task in (
    cli.deploy,
    cli.preflight,
    cli.kill_stale,
    cli.clean_shm,
    cli.patch_kv_config,
    cli.upload_script,
    cli.launch,
    cli.verify,
    cli.status,
    cli.logs,
    cli.stop,
    cli.diagnose_task,
    demo.demo,
    router.router_deploy,
    router.router_status_task,
    router.router_stop,
):
    ns.add_task(_task)
ns.configure({"kimi": copy.deepcopy(DEFAULTS)})

__all__ = ["ns"]
