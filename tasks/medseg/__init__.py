"""Medical segmentation task."""
