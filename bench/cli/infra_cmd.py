"""``bench infra up|status|down``: servers that outlive one command, on purpose."""

from __future__ import annotations

from rich.console import Console

from bench.errors import UserError
from infra import catalog, state
from infra.process import stop_pid


def up(kinds: list[str], console: Console, nodes: int = 1) -> None:
    current = state.load()
    running = {s["kind"] for s in current["servers"] if state.pid_alive(s["pid"])}
    current["servers"] = [s for s in current["servers"] if state.pid_alive(s["pid"])]
    for kind in kinds:
        if kind not in catalog.SERVERS or catalog.SERVERS[kind] is None:
            valid = [k for k, v in catalog.SERVERS.items() if v]
            raise UserError(f"unknown server kind {kind!r}; valid: {', '.join(valid)}")
    if nodes not in (1, 3):
        raise UserError(f"--nodes must be 1 or 3, got {nodes}")
    topology = "ensemble" if nodes == 3 else None
    for kind in kinds:
        if topology and (kind, topology) not in catalog.TOPOLOGIES:
            raise UserError(f"--nodes 3 works for zookeeper and etcd, not {kind}")
    for kind in kinds:
        if kind in running:
            console.print(f"{kind} is already up")
            continue
        workdir = state.state_dir() / kind
        workdir.mkdir(parents=True, exist_ok=True)
        server = catalog.server_class(kind, topology)(workdir, name=kind)
        server.start(detached=True)
        # ensembles and sentinel groups run several processes: remember every one
        pids = [p.pid for p in getattr(server, "processes", None) or [server.process]]
        current["servers"].append(
            {"kind": kind, "name": kind, "url": server.url, "pid": pids[0], "pids": pids, "dir": str(workdir)}
        )
        state.save(current)
        print(f"{kind} {server.url}")


def status() -> None:
    servers = state.load()["servers"]
    if not servers:
        print("no servers up (start some with: bench infra up redis)")
        return
    for s in servers:
        alive = "up" if state.pid_alive(s["pid"]) else "gone"
        print(f"{s['kind']}\t{alive}\t{s['url']}\tpid {s['pid']}")


def down(console: Console) -> None:
    current = state.load()
    for s in current["servers"]:
        stopped = [pid for pid in s.get("pids", [s["pid"]]) if stop_pid(pid)]
        if stopped:
            console.print(f"stopped {s['kind']} (pid {', '.join(map(str, stopped))})")
    state.save({"servers": []})
