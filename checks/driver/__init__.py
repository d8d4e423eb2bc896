"""The driver family: driver-loaded, driver-branch, driver-library-match, and the parser of
/proc/driver/nvidia/version they share."""
