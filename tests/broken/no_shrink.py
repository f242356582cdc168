"""A pytest plugin for ``test_conformance_catches_broken.py``: Hypothesis still searches for
a failure, but does not shrink the one it finds.

Those tests need only the verdict, not a minimal example. Shrinking the differential random
walk (real sockets at every step) took 38 of the 42 seconds of ``len_counts_closed``'s run.
The suite's own settings leave ``phases`` unset, so the profile loaded here applies to them.
"""

from hypothesis import Phase, settings

settings.register_profile("catch-broken", phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile("catch-broken")
