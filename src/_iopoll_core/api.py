"""The public names every implementation shares: the errors, ``Event``, ``ErrorCode`` and
the handles of SPEC sections 1 and 10.

``iopoll`` and ``iopoll_polyfill.fallback`` (the select implementation) each take these
with ``from _iopoll_core.api import *`` and add their own ``Backend``, ``Context`` and
``Watcher``.  Their ``__all__`` stay written out, because type checkers read a literal list
only; ``tests/test_public_names.py`` holds each of them to SPEC section 1.
"""

# One import a line, each a re-export (``X as X``): ``from _iopoll_core.api import *`` then
# brings exactly these, for the interpreter and for type checkers alike.  No
# ``from __future__`` import here, which would bring its ``annotations`` along.
from .errors import BackendUnavailableError as BackendUnavailableError
from .errors import FailedContextInitializationError as FailedContextInitializationError
from .errors import FailedHandleAddError as FailedHandleAddError
from .errors import FailedPollOperationError as FailedPollOperationError
from .errors import FailedPollWaitError as FailedPollWaitError
from .errors import FailedWatcherModificationError as FailedWatcherModificationError
from .errors import HandleAlreadyWatchedError as HandleAlreadyWatchedError
from .errors import InactiveWatcherError as InactiveWatcherError
from .errors import InvalidHandleError as InvalidHandleError
from .errors import PollError as PollError
from .events import ErrorCode as ErrorCode
from .events import Event as Event
from .handles import Handle as Handle
from .handles import StreamPollHandle as StreamPollHandle
from .handles import StreamPollWeakHandle as StreamPollWeakHandle
from .handles import WeakHandle as WeakHandle
from .process_handles import ProcessHandle as ProcessHandle
from .signal_handles import SignalHandle as SignalHandle
from .source_handles import NotifyHandle as NotifyHandle
from .source_handles import TimerHandle as TimerHandle
