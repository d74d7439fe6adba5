"""swerl: reinforcement learning on software-engineering tasks in real sandboxes."""

from swerl._gymnasium_hook import SPECS as GYMNASIUM_IDS
from swerl._gymnasium_hook import register as _register

__version__ = "0.1.0"

__all__ = ["GYMNASIUM_IDS", "__version__"]

try:  # bootstrap runs before dependencies are installed
    import gymnasium
except ImportError:  # pragma: no cover
    pass
else:
    _register(gymnasium)  # what the install's start-up hook does without ``import swerl``
    del gymnasium
