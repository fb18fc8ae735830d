"""Files the agent keeps on the node: directories of exact modes, whole-file
replacement, and stamps that say when another process replaced a file; and reads
of the node that may hang, off the event loop with a deadline.
May use: the standard library only.
"""
