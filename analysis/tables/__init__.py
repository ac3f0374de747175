"""The paper's Tables 1–5 rebuilt from results, beside the published ones.  Each table has a pure
builder from a long frame and readers — from our store (`runs`: the LM runs and evaluations as the
tables read them) or from the paper's own frames (`analysis.published`):

    table  module     from our store        from the paper's frames
    1      ppl        table1_from_store     table1_from_final_ppl (load_final_ppl)
    2      probe      table2_from_store     table2_from_paperdb (load_retrieval)
    3      length     table3_from_store     table3_from_lenextrap (paper.lenextrap)
    4      position   table4_from_store     table4_from_posloss (paper.posloss)
    5      seeds      table5_from_store     table5_from_final_ppl (load_final_ppl)

`beside` puts the published numbers beside ours; `rows` holds what every table's rows share;
`comparable` decides which runs a table may average (only the seeds of one `lab.store.variant`)
and raises `TableUnavailable` with what to run; `probe_table` prints Table 2 for the front ends.
"""
