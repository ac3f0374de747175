"""The paper's own numbers: its published tables (`paper`, from analysis/reference/) and the
authors' results database when one is given (`paperdb`).
"""
