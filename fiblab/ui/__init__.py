"""Notebook widgets: the wiring between ipywidgets and the lab's modules.

    fiblab.ui.coverage   CoverageExplorer (notebook 01); its pure `explore` step and its figure
                         in fiblab.ui.coverage_explore and fiblab.ui.coverage_figure
    fiblab.ui.probes     ProbePanel (notebook 02) over fiblab.jobs.probe_launch; its form in
                         fiblab.ui.probe_form, its status and tables in fiblab.ui.probe_view
    fiblab.ui.train      TrainPanel (notebook 03) over fiblab.jobs.launch
    fiblab.ui.alphas     AlphaExplorer (notebook 04) over analysis.figures.trajectories
    fiblab.ui.results    ResultsPanel (notebook 05); its sections in fiblab.ui.sections,
                         what 04 and 05 share in fiblab.ui.results_common
    fiblab.ui.search_panel  SearchPanel (notebook 06) over fiblab.jobs.search_launch; what it reads of
                         a study and its figures in fiblab.ui.search_view
    fiblab.ui.common     paths, FIBLAB_SMOKE, errors shown in the UI, PNG figures
    fiblab.ui.nbstrip    strip notebooks for committing (`make strip-notebooks`)

Nothing is imported here, so `import fiblab.ui.coverage` does not pull in torch.
"""
