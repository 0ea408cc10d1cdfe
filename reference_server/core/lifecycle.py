"""The response lifecycle's decisions (pure): statuses, errors, the input-items page.

What ``GET/DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` and
``POST /v1/responses/{id}/cancel`` answer, decided without I/O: the API's error
bodies for an unknown id and for a refused cancel, the status transitions of a
background response (``queued`` -> ``in_progress`` -> a terminal status), the
query of an input-items listing and the page it selects, and the shape each
stored item takes in that listing (the SDK's ``ResponseItem`` union, ids included).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from reference_server.core.validation import RequestError, invalid

QUEUED = "queued"
IN_PROGRESS = "in_progress"
TERMINAL = frozenset({"completed", "failed", "incomplete", "cancelled"})
# Where a background response may go from each status (docs/server.md "Background mode").
TRANSITIONS: dict[str, frozenset[str]] = {
    QUEUED: frozenset({IN_PROGRESS, "failed", "cancelled"}),
    IN_PROGRESS: TERMINAL,
}

LIST_LIMIT_DEFAULT = 20
LIST_LIMIT_MAX = 100
ORDERS = ("asc", "desc")


def can_move(old: str, new: str) -> bool:
    """Whether a background response in status ``old`` may take status ``new``."""
    return new in TRANSITIONS.get(old, frozenset())


def not_found(response_id: str) -> RequestError:
    """The API's 404 for an id it does not hold (``code`` and ``param`` are null there)."""
    return RequestError(404, None, f"Response with id '{response_id}' not found.")


def cancel_refusal(background: bool, status: str) -> RequestError | None:
    """Why a cancel is refused, or None when it proceeds (or is an idempotent no-op).

    Only background responses can be cancelled; cancelling one that is already
    cancelled answers the response again, as the API documents; one that ended
    otherwise cannot be cancelled any more.
    """
    if not background:
        return RequestError(400, None, "Cannot cancel a synchronous response.")
    if status in TERMINAL and status != "cancelled":
        return RequestError(400, None, f"Cannot cancel a {status} response.")
    return None


def not_streamable(response_id: str) -> RequestError:
    return RequestError(
        400,
        None,
        f"Response with id '{response_id}' was not created with background=true; "
        "only background responses can be streamed again (GET ...?stream=true).",
        "stream",
    )


@dataclass(frozen=True, slots=True)
class ListQuery:
    limit: int = LIST_LIMIT_DEFAULT
    order: str = "desc"
    after: str | None = None


def parse_list_query(params: dict[str, str]) -> ListQuery:
    """``limit`` (1..100, default 20), ``order`` (asc|desc, default desc), ``after`` (an item id)."""
    raw_limit = params.get("limit")
    limit = LIST_LIMIT_DEFAULT
    if raw_limit is not None:
        if not raw_limit.strip().isdigit() or not 1 <= int(raw_limit) <= LIST_LIMIT_MAX:
            raise invalid(
                f"Invalid 'limit': expected an integer from 1 to {LIST_LIMIT_MAX}, got {raw_limit!r}.",
                "limit",
            )
        limit = int(raw_limit)
    order = params.get("order", "desc")
    if order not in ORDERS:
        raise invalid(f"Invalid 'order': expected 'asc' or 'desc', got {order!r}.", "order")
    after = params.get("after") or None
    return ListQuery(limit, order, after)


def page(items: list[dict[str, Any]], query: ListQuery) -> dict[str, Any]:
    """The list object of one page: ``data``, ``first_id``, ``last_id``, ``has_more``.

    ``after`` names the last item of the previous page in the same order; an id
    that is not in the list is refused (400), as a cursor from elsewhere is.
    """
    ordered = items if query.order == "asc" else items[::-1]
    start = 0
    if query.after is not None:
        ids = [it.get("id") for it in ordered]
        if query.after not in ids:
            raise invalid(
                f"Invalid 'after': no input item with id '{query.after}' in this response.", "after"
            )
        start = ids.index(query.after) + 1
    data = ordered[start : start + query.limit]
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + query.limit < len(ordered),
    }


_ID_PREFIX = {"message": "msg", "function_call": "fc", "function_call_output": "fco"}


def input_item_views(items: list[dict[str, Any]], response_id: str) -> list[dict[str, Any]]:
    """Stored input items as the listing shows them: each with an id, a status, typed content.

    An item that came without an id gets one derived from the response and its
    position, so a page's cursor stays valid for every later page of the same
    listing.  Items the SDK's ``ResponseItem`` union cannot carry (an
    ``item_reference``) are left out.
    """
    suffix = response_id.split("_", 1)[-1]
    views: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        kind = item.get("type", "message")
        view = _view(item, kind)
        if view is None:
            continue
        # An id sent twice would make a cursor ambiguous (and auto-pagination loop).
        if not isinstance(view.get("id"), str) or view["id"] in seen:
            view["id"] = f"{_ID_PREFIX.get(kind, 'item')}_{suffix}in{index:04x}"
        seen.add(view["id"])
        views.append(view)
    return views


def _view(item: dict[str, Any], kind: str) -> dict[str, Any] | None:
    if kind == "message":
        role = item.get("role")
        content = item.get("content")
        status = "completed"
        if role == "assistant":
            status = item.get("status") or status
            parts = (
                [{"type": "output_text", "text": content, "annotations": []}]
                if isinstance(content, str)
                else [_output_part(p) for p in content or []]
            )
        else:
            parts = (
                [{"type": "input_text", "text": content}]
                if isinstance(content, str)
                else list(content or [])
            )
        return dict(id=item.get("id"), type="message", role=role, status=status, content=parts)
    if kind in ("function_call", "function_call_output", "reasoning"):
        view = dict(item)
        view["status"] = item.get("status") or "completed"
        if kind == "reasoning":
            view.setdefault("summary", [])
        return view
    return None


def _output_part(part: Any) -> Any:
    if isinstance(part, dict) and part.get("type") == "output_text":
        return {"annotations": [], **part}
    return part
