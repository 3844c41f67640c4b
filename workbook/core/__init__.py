"""Foundations every topic stands on: argument checks, gradients, a quiet TensorFlow start,
versions, MNIST, where code came from, and the figures' shared look (00_start_here.ipynb).
"""
