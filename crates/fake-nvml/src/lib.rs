//! placeholder: built by the fake-nvml work
