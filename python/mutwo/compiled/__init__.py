# The compiled route (docs/compiled.md): mutwo plans, Inductor compiles.
# PyTorch's adapter to the one planner: it traces the joint graph, asks
# PyTorch's min-cut for each candidate partition (_mincut, the one shim over
# the partitioner's internals), reads each partition into plain lists
# (_frontier), has the core order, solve, walk and choose, compiles and
# measures (_inductor, _step), agrees under torchrun (_ranks), and chunks a
# vocabulary loss (_loss). mutwo.torch.backend() is its entry point.
