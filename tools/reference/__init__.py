"""Independent float64 reference implementation of DeepSeek V4 as ds4 defines it
(shared/docs/model-spec.md). See README.md."""
