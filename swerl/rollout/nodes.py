"""Which Ray node an actor runs on, and whether a lost actor's node died with it.

When a node dies, its actors' calls fail within seconds (their sockets close) but
the GCS marks the node dead only after its health checks time out (~15 s by
default). So the runner asks the node itself: a raylet whose port refuses or does
not answer a connection is dead, and every episode its actors held is counted as
retried because a node died; replacement actors are kept off that node.

Until the GCS marks it dead, a dead node still takes new actors: one placed there never
runs, so it never says where it runs, and it dies when the GCS gives up on the node. Its
death message is then the only thing naming the node (``died_on``).
"""

from __future__ import annotations

import re
import socket
from dataclasses import dataclass
from typing import Any

import ray

NODE_ID_LABEL = "ray.io/node-id"
NODE_DIED = re.compile(r"its node has died\. Node Id: ([0-9a-f]{16,})")
"""The GCS's wording when an actor dies with its node (Ray's ``GenNodeDiedCause``)."""


@dataclass
class NodeFailure:
    """A node that died under the runner, and what the runner did about it."""

    node_id: str
    node: str
    """Its Ray node name (the IP unless ``ray start --node-name`` set one)."""
    detected_at: float
    """``time.time()`` when the runner found its raylet gone."""
    episodes_retried: int
    actors_replaced: int = 0
    """Actors that were being created on it when it died, started again on a live node."""


def current_node() -> dict[str, str]:
    """The node this process runs on: id and name (from the GCS, once per actor)."""
    node_id = ray.get_runtime_context().get_node_id()
    name = next((n.get("NodeName", "") for n in ray.nodes() if n["NodeID"] == node_id), "")
    return {"ray_node_id": node_id, "ray_node": name}


def node_info(node_id: str) -> dict[str, Any] | None:
    return next((n for n in ray.nodes() if n["NodeID"] == node_id), None)


def raylet_dead(node_id: str, timeout: float = 2.0) -> bool:
    """True when the node's raylet is gone: the GCS says so, or its port does not connect."""
    info = node_info(node_id)
    if info is None or not info.get("Alive"):
        return True
    try:
        with socket.create_connection((info["NodeManagerAddress"], info["NodeManagerPort"]), timeout):
            return False
    except OSError:
        return True


def died_on(error: BaseException) -> str | None:
    """The id of the node an actor died with, as its death message names it (None: not a node death)."""
    m = NODE_DIED.search(str(error))
    return m.group(1) if m else None


def avoiding(dead_nodes: set[str]) -> dict[str, Any]:
    """Actor options that keep it off ``dead_nodes`` (before the GCS itself marks them dead)."""
    if not dead_nodes:
        return {}
    return {"label_selector": {NODE_ID_LABEL: f"!in({','.join(sorted(dead_nodes))})"}}
