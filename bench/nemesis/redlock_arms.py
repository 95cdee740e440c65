"""RedLock under a master restart, as Kleppmann (2016) and the Redis distributed-locks page discuss it.

The holder wins with exactly 3 of 5 masters (two masters hold every case's lock key for a phantom
owner while bench arms the strike) and one of its 3 is SIGKILLed, then started again:

* ``restart-bare``: at once, without persistence: three masters are free while the holder holds;
* ``restart-aof``: at once, from its AOF (appendonly yes, appendfsync everysec);
* ``restart-delayed``: after the lease, without persistence (the Redis page's delayed restart).

Each arm can fail, and each has a control struck by the same strikes in the same group:
restart-bare's is redis.redlock itself (the catalog says it violates there). restart-delayed's is the
same lock with a lease that outlasts the delay (``canary.redlock-long-lease``): its holder holds on
through the restart, while a holder whose lease ends first lets go before the master is back.
restart-aof's is the same lock whose votes stay out of the AOF (``canary.redlock-unlogged``,
``redis.set_repl``): it loses its majority exactly when the strike restarted one of the holder's
masters from its file. Until round 14 restart-aof's control was redis.redlock, which cannot fail
there, so both RedLocks' restart-aof cells were "did not bite" on every matrix.
Unlike stopping two masters while the holder acquires, the phantom votes hold for any RedLock
client, whatever its reply timeouts; a lock whose key names bench does not know (no
``Lock.quorum_key``) may win all five, and its strike is then missed with that reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from bench.nemesis.kind import FaultKind
from bench.nemesis.restart import holders_by_server, restart_target
from bench.nemesis.window import FaultWindow

RESTART_BARE = "restart-bare"
RESTART_AOF = "restart-aof"
RESTART_DELAYED = "restart-delayed"
ARMS = (RESTART_BARE, RESTART_AOF, RESTART_DELAYED)

#: Of RedLock's 5 masters, these two hold every case's lock key for a phantom owner while bench
#: arms a strike, so each grant meanwhile rests on exactly the other three.
BLOCKED_FOR_BARE_MAJORITY = (3, 4)
PHANTOM = "lockbench-phantom-voter"
#: How long arming keeps asking for the votes a holder still has (its release frees them)
PHANTOM_WAIT_S = 1.0


#: Gives a free key to the phantom for 60 s and returns the key's value (KEYS[1], ARGV[1] the phantom's value).
_GIVE = (
    "local v = redis.call('get', KEYS[1]) if v then return v end "
    "redis.call('set', KEYS[1], ARGV[1], 'PX', 60000) return ARGV[1]"
)
#: Deletes a key only while the phantom owns it (KEYS[1], ARGV[1] the phantom's value).
_TAKE_BACK = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def phantom(nemesis: Any, servers: list[Any], on: bool) -> None:
    """Give (``on``) every case's free lock key on ``servers`` to a phantom owner, or take back what it holds.

    Only free keys and only the phantom's own: a holder's vote on these masters is the lock's state,
    and overwriting it (a plain SET did until round 18) or deleting it took a holder's majority away
    while it held, a loss the harness made that its release then reported as the lock's. A holder
    that keeps a vote here owns more than a bare majority, and its strike is missed (:func:`not_bare`).
    """
    keys = [k for box in nemesis.mailboxes for k in nemesis.quorum_keys.get(box.label, [])]
    import redis  # here: naming a kind (bench run --fault) must not import it

    clients = [redis.Redis.from_url(sv.url, socket_connect_timeout=2, socket_timeout=5) for sv in servers]
    try:
        if not on:
            for client in clients:
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    pipe.eval(_TAKE_BACK, 1, key, PHANTOM)
                pipe.execute()
            return
        # a vote a holder keeps is free once it releases: take it then, before the next grant
        deadline = time.monotonic() + PHANTOM_WAIT_S
        while True:
            held = 0
            for client in clients:
                pipe = client.pipeline(transaction=False)
                for key in keys:
                    pipe.eval(_GIVE, 1, key, PHANTOM)
                held += sum(value == PHANTOM.encode() for value in pipe.execute())
            if held == len(keys) * len(clients) or time.monotonic() >= deadline:
                return
            time.sleep(0.01)
    finally:
        for client in clients:
            client.close()


def not_bare(nemesis: Any) -> dict[str, str]:
    """Holders that own more than a bare majority: one restart cannot take their lock from them."""
    quorum = len(nemesis.servers) // 2 + 1
    counts: dict[str, int] = {}
    for labels in holders_by_server(nemesis.servers, nemesis.mailboxes):
        for label in labels:
            counts[label] = counts.get(label, 0) + 1
    out = {}
    for box in nemesis.mailboxes:
        n = counts.get(box.label, 0)
        if box.holder and n > quorum:
            why = (
                "declare Lock.quorum_key so bench can arrange a bare majority"
                if box.label not in nemesis.quorum_keys
                else "a phantom vote was lost"
            )
            out[box.label] = (
                f"the holder owned {n} of {len(nemesis.servers)} masters: one restart cannot take its majority ({why})"
            )
    return out


def _strike(kind: str) -> Callable[[Any, Callable[[], bool]], FaultWindow | None]:
    def strike(nemesis: Any, trigger: Callable[[], bool]) -> FaultWindow | None:
        servers = nemesis.servers
        if len(servers) < 5:
            raise RuntimeError(f"{kind} needs RedLock's 5 masters")
        blocked = [servers[i] for i in BLOCKED_FOR_BARE_MAJORITY]
        phantom(nemesis, blocked, on=True)
        try:
            if not trigger():
                return None
            running = [sv for sv in servers if sv not in blocked]
            target, missed = restart_target(running, nemesis.mailboxes)
            missed.update(not_bare(nemesis))
            start = time.monotonic_ns()
            target.process.kill()
            if target.process.popen is not None:
                target.process.popen.wait(10)
        finally:
            phantom(nemesis, blocked, on=False)
        freed = time.monotonic_ns()  # the lock service (a quorum of masters) serves on meanwhile
        down_s = (nemesis.lease_s or 10.0) + 0.5
        if kind == RESTART_DELAYED:
            # a holder whose lease ends before the master is back lets go now (never past its lease);
            # one whose lease outlasts the delay (the control) holds on through the restart
            nemesis.release_holders(lambda b: b.lease_left_s is None or b.lease_left_s < down_s + 1.0)
            # the delay is the arm's premise, so a case that ends meanwhile does not cut it short: a
            # holder still releasing then would find the master back, empty, inside its lease, a
            # loss the harness made (it failed a quick matrix on a loaded machine)
            time.sleep(max(0.0, down_s - (time.monotonic_ns() - start) / 1e9))
        target.start()
        how = {RESTART_BARE: "at once, no persistence", RESTART_AOF: "at once, from its AOF (everysec)",
               RESTART_DELAYED: f"after {down_s:g} s, no persistence"}[kind]  # fmt: skip
        detail = (
            f"held on exactly 3 of 5 masters (2 voted for a phantom); killed {target.process.name}, "
            f"started again {how}"
        )
        return FaultWindow(kind, start, time.monotonic_ns(), detail, missed, freed)

    return strike


_PRECONDITION = "the holder owned exactly 3 of the 5 masters (2 voted for a phantom) and the restarted master was one of them"
_REACH = "one of the 3 masters the holder's majority rests on, found by the holder's owner value"
KINDS = (
    FaultKind(
        name=RESTART_BARE, reach=_REACH, precondition=_PRECONDITION, backends=("redis",),
        controls={RESTART_BARE: {"redis": "redis.redlock"}}, strike=_strike(RESTART_BARE),
    ),
    FaultKind(
        name=RESTART_AOF, reach=_REACH, precondition=_PRECONDITION, backends=("redis",), topology="aof-everysec",
        controls={RESTART_AOF: {"redis": "canary.redlock-unlogged"}}, strike=_strike(RESTART_AOF),
    ),
    FaultKind(
        name=RESTART_DELAYED, reach=_REACH, precondition=_PRECONDITION, backends=("redis",),
        controls={RESTART_DELAYED: {"redis": "canary.redlock-long-lease"}}, strike=_strike(RESTART_DELAYED),
    ),
)  # fmt: skip
