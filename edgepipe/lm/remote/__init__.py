"""Language models beyond the box: OpenAI-compatible engines (llama-server, vLLM, Ollama, TGI)."""
