"""The LOOP lowering: an ATen graph through Inductor (decomposition, lowering, fusion) to a
:class:`~torchvendor.ir.loop_ir.schema.LoopProgram`, through Inductor's official out-of-tree
device hook (``register_backend_for_device``). Everything of the loop level that touches Inductor
is here; :mod:`torchvendor.ir.loop_ir.capture` is its public face (``lower_graph``,
``capture_loop``, ``loop_ir_hook``).

In the order one graph flows:

- :mod:`.driver`: :func:`~.driver.lower`, the one place Inductor is driven, and
  :func:`~.driver.inductor_settings`, the one patch of Inductor's config;
- :mod:`.inductor_hooks`: the Scheduling, wrapper codegen and cache-key pass registered for the
  device, each bound to the :class:`~.state.Lowering` under way;
- :mod:`.recorder`: each fused node's ``LoopBody`` replayed into a kernel;
- :mod:`.assembly`: the whole program (buffers, views, extern kernels, inputs, outputs);
- :mod:`.state`: what one lowering and each graph in it share;
- :mod:`.decompositions`: the table the graph must be decomposed with;
- :mod:`.unsupported`: :class:`~.unsupported.LoopIRUnsupported`.
"""
