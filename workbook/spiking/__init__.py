"""Spiking networks trained through time with surrogate gradients: a leaky integrate-and-fire
layer, its readout, seeded spike data sets and raster plots (08_spiking_networks.ipynb).
"""
