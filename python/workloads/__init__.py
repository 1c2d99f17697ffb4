# The PyTorch models that tests/ and bench/ both train, in one importable place
# (python/ is on both their paths; pip install . leaves it out, packaging
# python/mutwo alone): llama_decoder (the LLaMA-style decoder) and hf_models
# (Hugging Face architectures at tiny sizes).
