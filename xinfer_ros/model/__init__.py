"""Reference VLA model in torch + transformers: ViT, backbone prefill, action expert."""
