"""The controller's informers: ``infra.kube.cache.Cache`` over the controller's API door.

All the list+watch, store, index and read-your-writes logic lives in ``infra/kube/cache.py``
(shared with every component); this module only binds a cache to ``kubeapi.Api``'s client and
subscribes the controller's change handler, so the reconcile code keeps reading
``informer.Informer`` while there is one list+watch implementation in the code base.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar

from compute_domains.controller import kubeapi
from compute_domains.infra import backoff
from compute_domains.infra.kube import cache

R = TypeVar("R")
Key = cache.Key
Indexer = cache.Indexer
ChangeHandler = cache.ChangeHandler
object_key = cache.object_key
label_indexer = cache.label_indexer
field_indexer = cache.field_indexer


class Informer(cache.Cache[R]):
    """A shared cache bound to the controller's client, with one change handler."""

    def __init__(
        self,
        api: kubeapi.Api,
        resource: type[R],
        *,
        name: str,
        namespace: str | None = kubeapi.ALL_NAMESPACES,
        labels: Mapping[str, Any] | None = None,
        fields: Mapping[str, Any] | None = None,
        indexers: Mapping[str, Indexer] | None = None,
        on_change: ChangeHandler | None = None,
        watch_timeout_s: int = 300,
        relist_backoff: backoff.Backoff | None = None,
    ) -> None:
        super().__init__(
            api.client,
            resource,
            name=name,
            namespace=namespace,
            labels=labels,
            fields=fields,
            indexers=indexers,
            watch_timeout_s=watch_timeout_s,
            relist_backoff=relist_backoff,
        )
        if on_change is not None:
            self.subscribe(on_change)
