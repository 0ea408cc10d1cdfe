"""`make real-engine`: loopbench, guidellm and aiperf measured against vLLM on the CPU, each
tool's figures compared with the engine's own histograms and counters (docs/real-engine.md)."""
