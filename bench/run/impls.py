"""Which lock impls a command runs: ``--backend`` and ``--impl`` resolved to classes, checked.

Light on purpose (the registry only): the CLI checks ``--lock-params`` against these classes
before anything heavy is imported.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench import validate
from bench.errors import UserError
from lockimpls import registry
from lockimpls.base import LockConfigError


def impl_backend(impl_id: str, cls: type) -> str:
    """The backend an impl runs on: its class's ``backend``, else its id's prefix."""
    return getattr(cls, "backend", "") or impl_id.split(".", 1)[0]


def plan_impls(backends: Sequence[str], impls: Sequence[str]) -> list[tuple[str, str, type]]:
    """[(impl id, backend, class)] for the requested backends and impls, validated."""
    if not backends and not impls:
        raise UserError(f"say what to run: --backend {{{','.join(registry.backends())},all}} or --impl ID")
    chosen: list[str] = []
    valid_backends = registry.backends()
    for b in backends:
        if b == "all":
            chosen += registry.known_ids()
        elif b in valid_backends:
            chosen += registry.ids_for_backend(b)
        else:
            raise UserError(f"unknown backend {b!r}; valid: {', '.join(valid_backends)}, all")
    if impls and backends:
        # --impl narrows the backends' list; an impl of another backend is added
        narrowed = [i for i in chosen if i in impls]
        chosen = narrowed + [i for i in impls if i not in narrowed]
    elif impls:
        chosen = list(impls)
    out: list[tuple[str, str, type]] = []
    for impl_id in dict.fromkeys(chosen):
        if impl_id not in registry.known_ids(include_test=True) and ":" not in impl_id:
            hint = validate.did_you_mean(impl_id, registry.known_ids(include_test=True), "`bench list`")
            raise UserError(f"unknown impl {impl_id!r}{hint}; or give package.module:Class")
        try:
            cls = registry.resolve(impl_id)
        except LockConfigError as exc:
            raise UserError(str(exc)) from None
        out.append((impl_id, impl_backend(impl_id, cls), cls))
    return out
