"""A copy too big for ``/copies`` made without an asynchronous batch: the tree, level by level.

Meta copies at most 3 objects in one ``POST /{id}/copies`` and refuses a bigger deep copy
(100/1885194) without copying anything. Such a copy used to go through an asynchronous
batch request (``act_…/async_batch_requests``), which apps created since 2026-11-04 may
not use, in any version (Meta's blog, "Introducing Graph API v27.0 and Marketing API
v27.0", 2026-11-04). So the engine makes the same tree with what remains:

1. the children are read (``GET /{id}/adsets``, ``/ads``) — a tree over
   :data:`TREE_COPY_MAX_OBJECTS` is refused here, before any write;
2. ``POST /{id}/copies`` without ``deep_copy``: the campaign or ad set alone;
3. for a campaign, its ad sets: ``POST /{adset}/copies`` with ``campaign_id`` = the copy,
   ≤ 50 per synchronous Batch API call;
4. the ads: ``POST /{ad}/copies`` with ``adset_id`` = the copy of their ad set (Meta's
   ad copies reference, ``adgroup/copies``), ≤ 50 per call.

The children keep their names (``NO_RENAME``: what a deep copy's default
``ONLY_TOP_LEVEL_RENAME`` does) and take the same ``status_option``. It is recorded as one
copy: one intent, whose response is noted after every call (``mode: tree``,
``complete: false`` until the last, with the tree's ``level`` and ``planned`` size), so a
worker killed half-way leaves a pending intent that says what was made; it is settled from
what Meta holds under the copy, never sent again (:func:`ruleengine.writes.copies.settle_copy`
reads the copy's ad sets and ads back with their sources: the children of a call on its way
when the worker died are recorded too). A child Meta refused, or did not answer, stops the
tree there: the copy is recorded as made but ``copy_incomplete``, with every object Meta
holds under it (an unanswered call may have made some).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from ruleengine.acting.results import JobRun
from ruleengine.constants import BATCH_MAX_ITEMS
from ruleengine.meta.batch import SubResult
from ruleengine.meta.copies import CopyResult
from ruleengine.meta.errors import GraphError
from ruleengine.meta.writer import GraphWriter, WriteContext

#: The most objects Meta makes in one ``/copies`` (more: 100/1885194, nothing copied).
SYNC_COPY_MAX_OBJECTS: Final = 3
#: The biggest tree copied: what an asynchronous batch allowed (the copy and 50 children).
TREE_COPY_MAX_OBJECTS: Final = 51
#: Children keep their names, as in a deep copy (Meta renames only the top object).
_KEEP_NAMES: Final = {"rename_strategy": "NO_RENAME"}

Note = Callable[[dict[str, Any]], Awaitable[None]]
StillOurs = Callable[[], Awaitable[bool]]


@dataclass(frozen=True)
class Tree:
    """What a deep copy of one campaign or ad set makes: its ad sets and their ads."""

    root: str
    kind: str  # "campaign" or "adset"
    adsets: list[str] = field(default_factory=list)
    ads: list[tuple[str, str]] = field(default_factory=list)  # (ad, its ad set)

    @property
    def size(self) -> int:
        """Objects the copy creates."""
        return 1 + len(self.adsets) + len(self.ads)


@dataclass
class TreeCopy:
    """Where a tree copy got to: the objects made so far, and why it stopped early."""

    copied_id: str | None = None
    objects: list[dict[str, str]] = field(default_factory=list)
    complete: bool = False
    error: dict[str, Any] | None = None
    level: str | None = None
    planned: int | None = None

    def result(self) -> CopyResult:
        """The copy as far as it got."""
        return CopyResult(
            self.copied_id or "",
            self.objects,
            "tree",
            complete=self.complete,
            level=self.level,
            planned=self.planned,
        )

    def response(self) -> dict[str, Any]:
        """What the intent and the record keep of it."""
        return self.result().as_response()


async def read_tree(run: JobRun, root: str, kind: str) -> Tree:
    """The children a deep copy of ``root`` makes (GET only)."""
    reader, token, account = run.reader, run.token, run.account
    adsets: list[str] = []
    if kind == "campaign":
        listed = await reader.edge(f"{root}/adsets", token=token, fields=["id"], account_id=account)
        adsets = [str(a["id"]) for a in listed]
    ads = await reader.edge(
        f"{root}/ads", token=token, fields=["id", "adset_id"], account_id=account
    )
    return Tree(root, kind, adsets, [(str(a["id"]), str(a["adset_id"])) for a in ads])


async def copy_tree(
    writer: GraphWriter,
    tree: Tree,
    *,
    options: dict[str, Any],
    note: Note,
    still_ours: StillOurs,
) -> TreeCopy:
    """Copy ``tree`` level by level (see the module); ``note`` keeps progress on the intent,
    ``still_ours`` checks the account's lock before each call.

    Raises:
        GraphError: the top object's copy was refused (nothing was made).
    """
    status: str = options["status_option"]
    top = await writer.copy(
        status_option=status,
        rename_suffix=options["rename_suffix"],
        deep_copy=False,
        token=options["token"],
        ctx=options["ctx"],
    )
    copying = _Copying(writer, options["token"], options["ctx"], note, still_ours)
    copying.done = TreeCopy(top.copied_id, list(top.objects), level=tree.kind, planned=tree.size)
    await note(copying.done.response())
    copied_adsets = {tree.root: top.copied_id}
    if tree.kind == "campaign":
        forms = [(a, _form(status, campaign_id=top.copied_id)) for a in tree.adsets]
        copied_adsets = await copying.level("ad_set", forms)
    ads = [(ad, adset) for ad, adset in tree.ads if adset in copied_adsets]
    await copying.level("ad", [(ad, _form(status, adset_id=copied_adsets[s])) for ad, s in ads])
    copying.done.complete = copying.done.error is None
    return copying.done


@dataclass
class _Copying:
    """One tree copy under way: who writes, with which token, and how far it got."""

    writer: GraphWriter
    token: str
    ctx: WriteContext
    note: Note
    still_ours: StillOurs
    done: TreeCopy = field(default_factory=TreeCopy)

    async def level(
        self, kind: str, copies: Sequence[tuple[str, dict[str, Any]]]
    ) -> dict[str, str]:
        """Copy one level in Batch API calls of ≤ 50 (nothing once an earlier call went
        wrong); source → copy of what was made."""
        made: dict[str, str] = {}
        for start in range(0, len(copies), BATCH_MAX_ITEMS):
            if self.done.error is not None:
                break
            chunk = list(copies[start : start + BATCH_MAX_ITEMS])
            if not await self.still_ours():
                self.done.error = {"message": "the account's write lock was lost mid-copy"}
                break
            made |= await self._call(kind, chunk)
            await self.note(self.done.response())
        return made

    async def _call(self, kind: str, chunk: list[tuple[str, dict[str, Any]]]) -> dict[str, str]:
        try:
            results = await self.writer.copy_children(chunk, token=self.token, ctx=self.ctx)
        except GraphError as exc:  # unanswered or refused whole: any of them may have been made
            self.done.error = exc.as_dict()
            return {}
        made: dict[str, str] = {}
        for (source, _), result in zip(chunk, results, strict=True):
            copied = _copied_id(result.body) if result is not None and not result.error else None
            if copied is None:
                self.done.error = self.done.error or _item_error(source, result)
                continue
            made[source] = copied
            self.done.objects.append(
                {"ad_object_type": kind, "source_id": source, "copied_id": copied}
            )
        return made


def _form(status_option: str, **parent: str) -> dict[str, Any]:
    return {"status_option": status_option, "rename_options": _KEEP_NAMES, **parent}


def _copied_id(body: Any) -> str | None:
    if not isinstance(body, dict):
        return None
    copied = body.get("copied_adset_id") or body.get("copied_ad_id")
    return str(copied) if copied else None


def _item_error(source: str, result: SubResult | None) -> dict[str, Any]:
    if result is None:
        return {"message": f"Meta did not answer the copy of {source} (null)", "source": source}
    if result.error is not None:
        return result.error.as_dict() | {"source": source}
    return {"message": f"the copy of {source} answered no id", "source": source}
