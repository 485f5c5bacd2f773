"""promptevo: environment-grounded prompt optimization for LLM game agents."""

import os as _os

# LiteLLM fetches a remote price map at import time unless told not to; promptevo must work offline.
_os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

__version__ = "0.1.0"
