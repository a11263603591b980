"""A whole rank's load: the CUDA caching-allocator model (``allocator``), the load replayed in it
(``replay``) or run on CUDA (``wholemodel``), and its seconds predicted (``loadtime``; the
arithmetic, torch-free, is ``moe_suite.loadtime``'s); a layer's reload with new weights and each
strategy's reload safety (``refit``)."""
