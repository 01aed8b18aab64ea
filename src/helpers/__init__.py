"""Plumbing for the PyTorch Source Reading notebooks.

Modules (each docstring says which notebooks use it):
    notebook   setup_notebook(): seeds, one thread, print options, dynamo reset, versions
    source     source_view()/show_source(): live source of installed packages with permalinks
    launch     launch(): run a function on N ranks inside a process group, from a notebook
"""

__version__ = "0.1.0"
