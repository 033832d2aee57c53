"""Checks of the host's resources: the port, run_dir's disk, /dev/shm and logind's RemoveIPC."""

from __future__ import annotations

import ipaddress
from typing import TYPE_CHECKING

from ..facts import HostFacts
from ..shm import human_bytes
from .common import FIRST_NORMAL_UID, MIN_RUN_DIR_FREE_BYTES, MIN_SHM_FREE_BYTES, Check, _gib

if TYPE_CHECKING:
    from ..profile import Profile


_ANY_ADDRESS = frozenset({"", "*", "0.0.0.0", "::"})


def binds_clash(bind: str, held: str) -> bool:
    """Whether a listener on ``held`` keeps a server from binding the same port on ``bind``.

    Either side on any address (``0.0.0.0``, ``::``: dual-stack on Linux) clashes; two
    specific addresses clash only when they are the same (an IPv4-mapped IPv6 address is its
    IPv4 one). A host name cannot be told apart: it clashes.
    """
    if bind in _ANY_ADDRESS or held in _ANY_ADDRESS:
        return True
    try:
        b, h = ipaddress.ip_address(bind), ipaddress.ip_address(held)
    except ValueError:
        return True
    b = getattr(b, "ipv4_mapped", None) or b
    h = getattr(h, "ipv4_mapped", None) or h
    return b == h


def _check_port(profile: Profile, facts: HostFacts, own: set[int]) -> Check:
    port = profile.port
    listening = facts.listening_ports
    holders = (facts.port_processes or {}).get(port)
    if listening is None and facts.port_processes is None:
        return Check("port", "warn", f"cannot read listening ports; port {port} not checked")
    in_use = (listening is not None and port in listening) or holders is not None
    if not in_use:
        return Check("port", "pass", f"port {port} is free")
    held_on = (facts.listening_addresses or {}).get(port)
    if held_on and not any(binds_clash(profile.host, a) for a in held_on):
        return Check(
            "port",
            "pass",
            f"port {port} is free on {profile.host} (held on {', '.join(sorted(held_on))} only)",
        )
    holders = holders or []
    if holders and all(pid in own for _, pid in holders):
        pids = ", ".join(str(pid) for _, pid in holders)
        return Check(
            "port",
            "warn",
            f"port {port} is held by this deployment's server (pid {pids}); deploy replaces it",
        )
    foreign = [(n, pid) for n, pid in holders if pid not in own]
    if foreign:
        who = ", ".join(f"pid {pid} ({name})" for name, pid in foreign)
        return Check("port", "fail", f"port {port} is already in use by {who}")
    user = facts.user or "the login user"
    return Check(
        "port",
        "fail",
        f"port {port} is already in use by a process not visible to {user} (ss shows no owner)",
    )


def _check_disk(profile: Profile, facts: HostFacts, need: int) -> Check:
    disk = facts.run_dir_disk
    where = facts.run_dir_probe or profile.run_dir
    if disk is None:
        return Check("disk", "warn", f"cannot read free space for run_dir {profile.run_dir}")
    free = human_bytes(disk.free_bytes)
    if need and disk.free_bytes < need:
        return Check(
            "disk",
            "fail",
            f"only {free} free on {disk.path} (run_dir {where}); the launch files and a log "
            f"need {human_bytes(need)}",
        )
    if disk.free_bytes < MIN_RUN_DIR_FREE_BYTES:
        return Check(
            "disk", "warn", f"only {free} free on {disk.path} (run_dir {where}); logs may fill it"
        )
    return Check("disk", "pass", f"{free} free on {disk.path} (run_dir {where})")


def _check_shm(profile: Profile, facts: HostFacts) -> Check:
    where = profile.shm_dir  # (the facts are read there: /dev/shm unless the profile says)
    if facts.shm_dir_missing:
        # vLLM's shared memory (shm_broadcast, multiprocessing, NCCL) is always /dev/shm: a
        # shm_dir that does not exist is a wrong profile, and clean-shm could clean nothing.
        return Check(
            "shm",
            "fail",
            f"shm_dir {where} does not exist; vLLM's shared memory is in /dev/shm "
            "(set kimi.shm_dir to the directory the host's /dev/shm is)",
        )
    disk = facts.shm_disk
    if disk is None:
        return Check("shm", "warn", f"cannot read free space in {where}")
    # only files no process maps or holds open (a live program's segments are not leaks)
    unused = facts.shm_psm_files or {}
    what = f"{len(unused)} psm_*/sem.mp-* file(s) ({_gib(sum(unused.values()))})"
    if disk.free_bytes < MIN_SHM_FREE_BYTES:
        extra = f"; {what} no process uses" if unused else ""
        return Check(
            "shm",
            "warn",
            f"only {_gib(disk.free_bytes)} free in {where}{extra}; NCCL and vLLM need "
            "shared memory",
        )
    if unused:
        # whose they are the names do not say: vLLM's, or another program's of the same kind
        return Check(
            "shm",
            "warn",
            f"{what} in {where} that no process maps or holds open: probably leaked by a "
            "crashed vLLM, or kept by another program (fab clean-shm removes those this "
            "deployment's server made)",
        )
    return Check("shm", "pass", f"{_gib(disk.free_bytes)} free in {where}")


def _check_remove_ipc(profile: Profile, facts: HostFacts) -> Check:
    if facts.uid is None:
        return Check("remove_ipc", "warn", "cannot tell the login user; RemoveIPC not checked")
    user = facts.user or f"uid {facts.uid}"
    if facts.uid == 0:
        return Check("remove_ipc", "pass", "login user is root: logind's RemoveIPC does not apply")
    if facts.uid < FIRST_NORMAL_UID:
        return Check("remove_ipc", "pass", f"{user} is a system user: RemoveIPC does not apply")
    if facts.remove_ipc is False:
        return Check("remove_ipc", "pass", f"RemoveIPC=no: {user}'s shared memory survives logout")
    setting = "RemoveIPC=yes" if facts.remove_ipc else "RemoveIPC is unset (systemd default: yes)"
    return Check(
        "remove_ipc",
        "warn",
        f"{setting} and the login user {user} is not root: systemd-logind deletes {user}'s "
        "/dev/shm segments when their last SSH session ends, killing vLLM's shared memory; set "
        "RemoveIPC=no in /etc/systemd/logind.conf or run loginctl enable-linger " + user,
    )
