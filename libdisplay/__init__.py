"""libdisplay: the hardware, format and protocol layer every display-operator binary stands on.

Modules own one concept each and have no entry points beyond `python3 -m` diagnosis helpers.
"""

__version__ = "0.1.0"
