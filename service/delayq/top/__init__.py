"""``delayq top``: a live view of any delayq cluster (a local one's DIR, or any
node's address), node by node, with its topics and groups.

- ``sampler``: the I/O: where the nodes are (``DirNodes``, ``ServerNodes``) and
  what each answers (health, ``Stats``, admin ``Status``), all asked at once;
- ``samples``: what one look at every node got (pure values);
- ``rows``: two samples made into a frame (a row a node, the topic and group
  sections), ordered, and its JSON document (pure);
- ``screen``: a frame as text, and the keys (pure).

The command itself (its options, the curses terminal, the refresh loop) is
``cli/top.py``. It reads nodes over gRPC and the local cluster's files through
``cluster`` (the layer below it); never the engine, store or server.
"""
