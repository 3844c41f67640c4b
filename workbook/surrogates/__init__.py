"""Forward one function, backpropagate another: the catalogue, its Keras layer, plots and
explorer of forward and derivatives, and the students' self-check (01, 02).
"""
