"""`kraft.frozen.fast_init`: the core's values built through their slot descriptors are the
same values, just as frozen, with the same signature as the `__init__` dataclasses writes."""

from __future__ import annotations

import dataclasses
import inspect
from types import ModuleType

import pytest

import kraft.raft.effects as effects
import kraft.raft.events as events
import kraft.raft.messages as messages
import kraft.statemachine.base as sm_base
from kraft.frozen import fast_init

MODULES = (messages, events, effects, sm_base)


def _frozen_classes(module: ModuleType) -> list[type]:
    return [c for c in vars(module).values()
            if isinstance(c, type) and c.__module__ == module.__name__
            and dataclasses.is_dataclass(c) and c.__dataclass_params__.frozen]  # type: ignore[attr-defined]


def _plain(cls: type) -> bool:
    return all(f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls))


def _reference(cls: type) -> type:
    """The same class built by `dataclasses` alone (its own generated `__init__`)."""
    twin = dataclasses.make_dataclass(
        cls.__name__,
        [(f.name, object, dataclasses.field(default=f.default)) if f.default is not dataclasses.MISSING
         else (f.name, object) for f in dataclasses.fields(cls)],
        frozen=True, slots=True)
    return twin


ALL = [c for m in MODULES for c in _frozen_classes(m)]
FAST = [c for c in ALL if _plain(c)]


def test_every_plain_frozen_value_of_the_core_is_built_fast() -> None:
    # the replication path builds these on every write: a class that lost the decorator goes
    # back to one object.__setattr__ per field
    assert len(FAST) > 50
    for cls in FAST:
        assert cls.__init__.__globals__.get("__fast_init_of__") is cls, cls.__qualname__


@pytest.mark.parametrize("cls", FAST, ids=lambda c: c.__qualname__)
def test_fast_init_builds_the_same_frozen_value(cls: type) -> None:
    fields = dataclasses.fields(cls)
    ref = _reference(cls)
    # same parameters, in the same order, with the same defaults
    got = [(p.name, p.default) for p in list(inspect.signature(cls.__init__).parameters.values())[1:]]
    want = [(p.name, p.default) for p in list(inspect.signature(ref.__init__).parameters.values())[1:]]
    assert got == want
    values = {f.name: object() for f in fields}
    by_position = cls(*values.values())
    by_keyword = cls(**values)
    for f in fields:
        assert getattr(by_position, f.name) is values[f.name]
        assert getattr(by_keyword, f.name) is values[f.name]
    assert by_position == by_keyword
    assert hash(by_position) == hash(by_keyword)
    # the defaults, when only the required fields are given
    required = {f.name: values[f.name] for f in fields if f.default is dataclasses.MISSING}
    partial = cls(**required)
    for f in fields:
        if f.default is not dataclasses.MISSING:
            assert getattr(partial, f.name) is f.default
    # still frozen
    if fields:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(by_position, fields[0].name, 1)
        with pytest.raises(dataclasses.FrozenInstanceError):
            delattr(by_position, fields[0].name)
    with pytest.raises(TypeError):
        cls(*values.values(), object())  # one argument too many
    with pytest.raises(TypeError):
        cls(no_such_field=1, **values)
    if required:
        with pytest.raises(TypeError):
            cls()


def test_fast_init_refuses_what_it_would_build_differently() -> None:
    @dataclasses.dataclass(slots=True)
    class Mutable:
        a: int

    @dataclasses.dataclass(frozen=True)
    class NoSlots:
        a: int

    @dataclasses.dataclass(frozen=True, slots=True)
    class Factory:
        a: list[int] = dataclasses.field(default_factory=list)

    @dataclasses.dataclass(frozen=True, slots=True)
    class PostInit:
        a: int

        def __post_init__(self) -> None:
            pass

    @dataclasses.dataclass(frozen=True, slots=True)
    class KeywordOnly:
        a: int = dataclasses.field(kw_only=True)

    @dataclasses.dataclass(frozen=True, slots=True)
    class NotInInit:
        a: int
        b: int = dataclasses.field(default=0, init=False)

    for cls, why in ((Mutable, "not a frozen, slotted"), (NoSlots, "not a frozen, slotted"),
                     (Factory, "Factory.a is not a plain field"),
                     (PostInit, "has a __post_init__"),
                     (KeywordOnly, "KeywordOnly.a is not a plain field"),
                     (NotInInit, "NotInInit.b is not a plain field")):
        with pytest.raises(TypeError, match=why):
            fast_init(cls)


def test_a_value_with_no_fields() -> None:
    @fast_init
    @dataclasses.dataclass(frozen=True, slots=True)
    class Nothing:
        pass

    assert Nothing() == Nothing()
    with pytest.raises(TypeError):
        Nothing(1)  # type: ignore[call-arg]
