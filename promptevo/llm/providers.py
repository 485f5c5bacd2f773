"""Lazy access to LiteLLM and registration of promptevo's in-process providers (``local``, ``fake``)."""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any, Callable

import promptevo  # noqa: F401  (sets LITELLM_LOCAL_MODEL_COST_MAP before litellm is imported)

if TYPE_CHECKING:  # pragma: no cover
    import litellm as _litellm_mod

_LITELLM_LOCK = threading.Lock()
_LITELLM: Any = None


def litellm_module() -> "_litellm_mod":
    """Import litellm on first use (slow import) and quieten its stdout debug hints."""
    global _LITELLM
    if _LITELLM is None:
        with _LITELLM_LOCK:
            if _LITELLM is None:
                os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
                import litellm

                litellm.suppress_debug_info = True
                _LITELLM = litellm
    return _LITELLM


def register_provider(name: str, handler_factory: Callable[[], Any]) -> None:
    """Add ``name`` to litellm.custom_provider_map once (keeps other entries)."""
    litellm = litellm_module()
    with _LITELLM_LOCK:
        cpm = litellm.custom_provider_map
        if not any(item.get("provider") == name for item in cpm):
            cpm.append({"provider": name, "custom_handler": handler_factory()})
        custom_llm_setup_all()


def custom_llm_setup_all() -> None:
    litellm = litellm_module()
    try:
        from litellm.utils import custom_llm_setup

        custom_llm_setup()
    except ImportError:  # pragma: no cover - older/newer litellm layouts
        for item in litellm.custom_provider_map:
            if item["provider"] not in litellm.provider_list:
                litellm.provider_list.append(item["provider"])
            if item["provider"] not in litellm._custom_providers:
                litellm._custom_providers.append(item["provider"])


