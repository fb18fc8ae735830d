"""Offline tools for claim authors: nothing here runs on the node.

Owns: CEL device selectors with Kubernetes DRA semantics, `simulate` (claims
allocated the way the scheduler does), `lint`, and topology pictures. May use
every layer below; needs the `tools` extra (`pip install -e '.[tools]'` in a clone).
"""
