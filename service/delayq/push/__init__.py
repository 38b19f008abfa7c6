"""HTTP push delivery: what a push group's pusher needs that is not the engine's
(its snapshot for Stats and metrics, egress rules, signing, answers, the target's
gate, the HTTP client). Imports only engine-free leaves and ``delivery``'s pure
``pushtarget`` and ``types``; the pushers themselves run in ``server``."""
