"""The MNIST autoencoder lab with a pluggable bottleneck (04) and the assignment's self-checks (05)."""
