"""Rule groups of the conformance suite, one mixin class per group (``<Group>Rules``)."""
