"""Quantisation-aware training in Keras 3 (07): quantised Dense and Conv2D layers taking their
quantisers by catalogue name, a weight clip, k-bit and learned-step quantisers, a summary of bits
and memory, and the self-check of the chapter's exercise.
"""
