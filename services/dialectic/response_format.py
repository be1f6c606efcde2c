"""The JSON schema a Chat answer must satisfy (`response_format`).

A caller's schema is refused unless it is small, shallow and self-contained, and it is checked and applied
without ever fetching anything: a `$ref` to a URL or a file would be request forgery or file disclosure.
Its regular expressions (`pattern`, `patternProperties`) run on RE2, in time linear in the text: Python's
backtracking `re`, which jsonschema uses, takes exponential time on a pattern such as `^(a|aa)+$`, so a
caller could spend the server's CPU through a model's answer. A pattern RE2 cannot run (backreferences,
lookaround) is refused.
Applying a schema is bounded in work too: `$ref`s, `allOf`, `anyOf` and `oneOf` can multiply the subschemas
one value is checked against (a chain of 60 `allOf`s of two `$ref`s each is 2^60 checks in 4 KB), so a check
stops after MAX_STEPS keyword evaluations; a subschema naming its own `$schema` keeps RE2 and the bound.
`parse` is cheap and may run on the event loop; `check` and `problems` are CPU-heavy: await `checked` and
`problems_in`, which run them on a small pool of their own (not the default executor the embedder shares).
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextvars import ContextVar
from functools import lru_cache
from typing import Any

import attrs
import jsonschema
import re2
import referencing
import referencing.exceptions
import referencing.jsonschema

from services.errors import InvalidArgument

MAX_SCHEMA_BYTES = 64 * 1024  # serialized as UTF-8 JSON; a real answer schema is a few KB
MAX_SCHEMA_DEPTH = 32  # objects and arrays inside each other; well below Python's recursion limit
# draft-04's metaschema makes `enum` unique, and jsonschema compares objects pairwise (O(n²): 1,000 objects
# took 2 s, 3,000 took 25 s); these keep that check to a few milliseconds
MAX_COMPOSITES_PER_ARRAY = 100
MAX_COMPOSITES_IN_ARRAYS = 1_000
REF_KEYWORDS = ("$ref", "$dynamicRef", "$recursiveRef")
LOCAL_REF_PREFIX = "#/"  # a JSON pointer into the schema itself; "#" alone is the root, i.e. self-recursion
# retrieves nothing: any reference outside the schema fails to resolve instead of being fetched
NO_RETRIEVAL: referencing.Registry = referencing.Registry()
# one instance of each JSON type: a $ref cycle that consumes nothing recurses on at least one of them
_TRIAL_INSTANCES = (None, True, 0, "", [], {})
# keyword evaluations one check may take (about 4-15 µs each): an answer of 2,000 objects of 5 typed
# properties takes 16,002, a schema's trial values a few hundred
MAX_STEPS = 50_000
_steps: ContextVar[list[int] | None] = ContextVar("response_format_steps", default=None)
_CHECKS = ThreadPoolExecutor(max_workers=2, thread_name_prefix="response-format")


class TooMuchWork(Exception):
    """A check passed MAX_STEPS keyword evaluations."""


def parse(text: str | None, obj: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The schema from its text or object form, with its shape checked (size, depth, numbers, refs); None if
    absent. Does not check it against its metaschema: that is `check`."""
    if text is None and obj is None:
        return None
    schema: Any = obj if text is None else _loads(text)
    if not isinstance(schema, dict):
        raise InvalidArgument("response_format must be a JSON schema object")
    _check_dialect(schema.get("$schema"))
    _check_shape(schema)
    _check_size(schema)
    return schema


def check(schema: Mapping[str, Any]) -> None:
    """InvalidArgument unless `schema` is valid for its metaschema, every $ref points into it, every
    pattern runs on RE2, and no $ref cycle recurses without end. CPU-heavy: call it off the event loop."""
    cls = jsonschema.validators.validator_for(schema)
    try:
        cls.check_schema(schema)
    except jsonschema.SchemaError as error:
        # the message quotes the offending part of the schema, which may be most of its 64 KB
        shown = error.message if len(error.message) <= 300 else error.message[:300] + "…"
        raise InvalidArgument(f"response_format is not a valid JSON schema: {shown}") from None
    _check_patterns(schema)
    resolver = NO_RETRIEVAL.resolver_with_root(
        referencing.Resource.from_contents(schema, default_specification=referencing.jsonschema.DRAFT202012)
    )
    for ref in sorted(set(_refs(schema))):
        try:
            resolver.lookup(ref)
        except referencing.exceptions.Unresolvable:
            raise _dangling(ref) from None
    validator = _validator(schema)
    try:
        _bounded(lambda: [list(validator.iter_errors(instance)) for instance in _TRIAL_INSTANCES])
    except RecursionError:
        raise InvalidArgument("response_format: its $refs form a cycle that recurses without end") from None
    except referencing.exceptions.Unresolvable as error:  # a ref resolved against a nested $id
        raise _dangling(str(getattr(error, "ref", error))) from None
    except TooMuchWork:
        raise InvalidArgument(
            f"response_format: checking one value of each JSON type against it takes over {MAX_STEPS:,} steps; "
            "its $refs with allOf, anyOf or oneOf multiply the subschemas each value is checked against"
        ) from None


def _dangling(ref: str) -> InvalidArgument:
    return InvalidArgument(
        f"response_format: $ref {_shown(ref)} points at nothing in the schema; "
        "use a JSON pointer from the schema's root, such as '#/$defs/name'"
    )


def problems(schema: Mapping[str, Any], value: Any) -> list[str]:
    """Why `value` does not satisfy `schema` (empty: it does). CPU-heavy: call it off the event loop."""
    validator = _validator(schema)
    try:
        errors = _bounded(lambda: list(validator.iter_errors(value)))
    except RecursionError:  # an answer nested deeper than a recursive schema can follow
        return ["- (root): the answer is nested too deeply to check against the schema"]
    except referencing.exceptions.Unresolvable as error:  # `check` tries every ref; this is a safety net
        return [f"- (root): the schema's $ref {_shown(str(getattr(error, 'ref', error)))} points at nothing"]
    except TooMuchWork:
        return [f"- (root): checking the answer against the schema took over {MAX_STEPS:,} steps; answer more simply"]
    except ArithmeticError as error:  # multipleOf on a number too big for a float
        return [f"- (root): a number in the answer cannot be checked: {error}"]
    return [f"- {'/'.join(map(str, e.absolute_path)) or '(root)'}: {e.message}" for e in errors]


async def on_own_threads(fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)` on the module's own threads: CPU work a caller's schema sizes."""
    return await asyncio.get_running_loop().run_in_executor(_CHECKS, fn, *args)


async def checked(schema: Mapping[str, Any]) -> None:
    """`check` on the module's own threads."""
    await on_own_threads(check, schema)


async def problems_in(schema: Mapping[str, Any], value: Any) -> list[str]:
    """`problems` on the module's own threads."""
    return await on_own_threads(problems, schema, value)


def _bounded(run: Callable[[], list]) -> list:
    """`run()` with a budget of MAX_STEPS keyword evaluations; TooMuchWork past it."""
    token = _steps.set([0])
    try:
        return run()
    finally:
        _steps.reset(token)


def _spend() -> None:
    steps = _steps.get()
    if steps is not None:
        steps[0] += 1
        if steps[0] > MAX_STEPS:
            raise TooMuchWork


def _budgeted(keyword: Callable[..., Any]) -> Callable[..., Any]:
    """`keyword` counting a step for its call and one for each error it passes up: an error found deep in
    nested $refs is handed up through every level, which costs as much as evaluating them."""

    def counted(validator: Any, value: Any, instance: Any, schema: Any) -> Iterator[Any]:
        _spend()
        for error in keyword(validator, value, instance, schema) or ():
            _spend()
            yield error

    return counted


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> Any:
    return re2.compile(pattern)


def _search(pattern: str, text: str) -> bool:
    return _regex(pattern).search(text) is not None


def _check_patterns(schema: Mapping[str, Any]) -> None:
    """Every regular expression compiles on RE2; unevaluatedProperties beside patternProperties is refused,
    because jsonschema evaluates that pair with `re` in code this module cannot reach."""
    dicts = [value for value, _ in _walk(schema) if isinstance(value, dict)]
    for value in dicts:
        found = [value["pattern"]] if isinstance(value.get("pattern"), str) else []
        if isinstance(value.get("patternProperties"), dict):
            found += list(value["patternProperties"])
        for pattern in found:
            try:
                _regex(pattern)
            except re2.error as error:
                raise InvalidArgument(
                    f"response_format: pattern {_shown(pattern)} cannot be evaluated in linear "
                    f"time here ({error}); backreferences and lookaround are not supported"
                ) from None
    if any("unevaluatedProperties" in d for d in dicts) and any("patternProperties" in d for d in dicts):
        raise InvalidArgument(
            "response_format: unevaluatedProperties together with patternProperties is not "
            "supported; use additionalProperties instead"
        )


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "string") and not _search(pattern, instance):
        yield jsonschema.ValidationError(f"{_shown(instance)} does not match {pattern!r}")


def _pattern_properties(
    validator: Any, patterns: Mapping[str, Any], instance: Any, schema: Any
) -> Iterator[jsonschema.ValidationError]:
    if validator.is_type(instance, "object"):
        for pattern, subschema in patterns.items():
            for key, value in instance.items():
                if _search(pattern, key):
                    yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(
    validator: Any, additional: Any, instance: Any, schema: Mapping[str, Any]
) -> Iterator[jsonschema.ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    known, patterns = schema.get("properties", {}), list(schema.get("patternProperties", {}))
    extras = sorted(k for k in instance if k not in known and not any(_search(p, k) for p in patterns))
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif not additional and extras:
        yield jsonschema.ValidationError(f"additional properties are not allowed ({', '.join(map(repr, extras))})")


_RE2_KEYWORDS = {
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
}


@lru_cache(maxsize=16)
def _safe_dialect(cls: Any) -> Any:
    """`cls` with its patterns on RE2 and every keyword counted against the budget."""
    keywords = {**cls.VALIDATORS, **_RE2_KEYWORDS}
    safe = jsonschema.validators.extend(cls, {name: _budgeted(fn) for name, fn in keywords.items()})
    safe.evolve = _evolve
    return safe


def _evolve(self: Any, **changes: Any) -> Any:
    """jsonschema's own `evolve`, except that a subschema naming a dialect (`$schema`) gets that dialect made
    safe: jsonschema would switch to its plain class there, with `re` and no budget."""
    schema = changes.setdefault("schema", self.schema)
    named = jsonschema.validators.validator_for(schema, default=None)
    new = type(self) if named is None else _safe_dialect(named)
    for field in attrs.fields(type(self)):
        if field.init and field.alias not in changes:
            changes[field.alias] = getattr(self, field.name)
    return new(**changes)


def _validator(schema: Mapping[str, Any]) -> Any:
    """A validator for `schema`'s dialect that retrieves nothing, runs its patterns on RE2 and counts its
    work."""
    return _safe_dialect(jsonschema.validators.validator_for(schema))(schema, registry=NO_RETRIEVAL)


def _loads(text: str) -> Any:
    if len(text) > MAX_SCHEMA_BYTES:  # before parsing: a character is at least one byte
        raise InvalidArgument(
            f"response_format.json_schema has {len(text)} characters; the limit is {MAX_SCHEMA_BYTES} bytes"
        )
    try:
        return json.loads(text, parse_constant=_no_constant)
    except RecursionError:
        raise InvalidArgument(f"response_format.json_schema is nested more than {MAX_SCHEMA_DEPTH} deep") from None
    except ValueError as error:
        raise InvalidArgument(f"response_format.json_schema is not JSON: {error}") from None


def _check_dialect(uri: Any) -> None:
    # an unknown dialect would be validated as the latest draft, with a warning that it will become an error
    if uri is None:
        return
    try:
        referencing.jsonschema.specification_with(uri if isinstance(uri, str) else "")
    except referencing.jsonschema.UnknownDialect:
        raise InvalidArgument(
            f"response_format: $schema {_shown(str(uri))} is not a JSON Schema dialect this "
            "server knows; omit it or use e.g. 'https://json-schema.org/draft/2020-12/schema'"
        ) from None


def _no_constant(name: str) -> Any:
    # Python's json accepts NaN and Infinity; JSON does not
    raise ValueError(f"{name} is not a JSON number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):  # 1e999: a float would hold infinity, which JSON cannot express again
        raise ValueError(f"{text[:40]} is beyond the range of a double")
    return value


def loads_answer(text: str) -> Any:
    """An answer's JSON, refusing what JSON cannot express (NaN, Infinity, numbers beyond a double):
    ValueError, like any text that is not JSON."""
    return json.loads(text, parse_constant=_no_constant, parse_float=_finite)


def _check_shape(schema: dict[str, Any]) -> None:
    """Depth, finite numbers, local refs and few objects in arrays, walked without recursion (the input may
    be deeper than the stack)."""
    composites = 0
    for value, depth in _walk(schema):
        if depth > MAX_SCHEMA_DEPTH:
            raise InvalidArgument(f"response_format is nested more than {MAX_SCHEMA_DEPTH} deep")
        if isinstance(value, float) and not math.isfinite(value):
            raise InvalidArgument(f"response_format holds the number {value}, which JSON cannot express")
        if isinstance(value, dict):
            for keyword in REF_KEYWORDS:
                ref = value.get(keyword)
                if isinstance(ref, str) and not ref.startswith(LOCAL_REF_PREFIX):
                    raise InvalidArgument(
                        f"response_format: {keyword} {_shown(ref)} is not allowed; only references into the "
                        f"schema itself ('{LOCAL_REF_PREFIX}…', e.g. '#/$defs/name') are, and never to its root"
                    )
        if isinstance(value, list):
            n = sum(isinstance(item, dict | list) for item in value)
            composites += n
            if n > MAX_COMPOSITES_PER_ARRAY or composites > MAX_COMPOSITES_IN_ARRAYS:
                raise InvalidArgument(
                    f"response_format has too many objects or arrays inside arrays: at most "
                    f"{MAX_COMPOSITES_PER_ARRAY} in one array and {MAX_COMPOSITES_IN_ARRAYS} in all"
                )


def _walk(root: Any) -> Iterator[tuple[Any, int]]:
    """Every value in `root` with its depth (root = 1), depth-first; keys are not yielded."""
    stack = [(root, 1)]
    while stack:
        value, depth = stack.pop()
        yield value, depth
        if depth > MAX_SCHEMA_DEPTH:
            continue  # the caller refuses it; do not walk a deeper input any further
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def _refs(schema: Any) -> Iterator[str]:
    for value, _ in _walk(schema):
        if isinstance(value, dict):
            yield from (value[k] for k in REF_KEYWORDS if isinstance(value.get(k), str))


def _check_size(schema: dict[str, Any]) -> None:
    try:
        size = len(json.dumps(schema, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except UnicodeEncodeError:  # a lone surrogate from a "\ud800" escape: not Unicode text
        raise InvalidArgument("response_format holds a lone surrogate (\\ud800–\\udfff), which is not text") from None
    if size > MAX_SCHEMA_BYTES:
        raise InvalidArgument(f"response_format is {size} bytes as JSON; the limit is {MAX_SCHEMA_BYTES}")


def _shown(ref: str) -> str:
    return repr(ref if len(ref) <= 80 else ref[:80] + "…")
