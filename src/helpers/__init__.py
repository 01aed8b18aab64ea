"""Plumbing for the PyTorch Source Reading notebooks.

Modules (each docstring says which notebooks use it and what it assumes):
    notebook       setup_notebook(): seeds, one thread, print options, dynamo reset, versions
    source         source_view()/show_source(): live source of installed packages, permalinks
    launch         launch(): run a function on N ranks inside a process group, from a notebook
    processes      parent-death signal, child import path, loopback sockets (launch, torchrun)
    claims         presence, signature and default checks that say what they expected and found
    tracing        call-path recorder, stepper, RecordingBackend (01)
    landmarks      compile-path stages checked on a recording (01)
    compile_tools  bytecode and guard capture, AOTAutograd graphs, timing (02, 03)
    collectives    workers for process groups and collectives (04)
    allreduce      naive, master, ring and pipelined ring all-reduce, bytes, simulations (05)
    ddp            DDP workers: broadcast, buffers, buckets, comm hooks, no_sync (06, 08)
    syncbn         a CPU SyncBatchNorm and its converter (07, train_ddp)
    train_ddp      `python -m helpers.train_ddp`: the torchrun-able DDP training script (09)
    torchrun       start torchrun from Python so that no worker outlives the caller (09)
    onnx_tools     export with either exporter, ONNX Runtime parity, op tables, mapping (10, 11)
    netron_view    Netron on 127.0.0.1 in a temp folder, always stopped (10)
    onnx_custom    custom operators for both exporters (11)
    board_op       a C++ upsample operator (csrc/) carried to ONNX Runtime, Resize semantics (12)
    sharded        ZeRO stages 1 and 2 from scratch, FSDP2, bytes per rank (13)
    ddp_compile    DDPOptimizer subgraphs, compiled autograd, profiler traces of DDP steps (14)
"""

__version__ = "0.1.0"
