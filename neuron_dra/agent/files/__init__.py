"""Files the agent keeps on the node: directories of exact modes, whole-file
replacement, and stamps that say when another process replaced a file.
May use: the standard library only.
"""
