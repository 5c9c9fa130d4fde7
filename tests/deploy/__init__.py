"""Tests of deploy/: the manifests a cluster owner applies, the images and the examples."""
