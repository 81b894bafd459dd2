"""Every file format kperf reads or writes about what happened inside a kernel, one module each:

- :mod:`.records`: :class:`~.records.Timeline`, the table of region records (ns) every
  intra-kernel analysis reads;
- :mod:`.kernel_trace`: :class:`~.kernel_trace.KernelTrace`, one launch's records in SM cycles,
  and its conversion into a Timeline;
- :mod:`.proton_chrome`: Proton's Chrome trace (the one reader of its slices and thread names);
- :mod:`.proton_raw`: Proton's raw device buffer;
- :mod:`.clock`: the SM clock of a launch (the one estimate from stamps, the fit on raw cycles)
  and the spans that need it;
- :mod:`.timeline_file`: kperf's timeline JSON and ``timeline.npz`` (one writer, one reader);
- :mod:`.kernel_records`: kernel start/end records (kperf JSON, torch.profiler/Kineto traces);
- :mod:`.perfetto`: the Perfetto / Chrome-trace writer.

This package imports nothing from ``capture``, ``analysis`` or ``report``: they import it.
"""
