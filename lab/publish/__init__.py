"""Models out: a run folder's model without its data (`export`), a trained model as a folder
that needs nothing of the training side (`pretrained`), and export to Hugging Face as a
`LlamaForCausalLM` with equal outputs (`hf`).
"""
