//! HLO-to-HLO passes (simplification, fusion, layout and buffer assignment), the pass
//! pipeline, and the kernel IR: loop nests over physical buffers whose index arithmetic is
//! specialized to the buffers' layouts. Nothing here yet: the end-to-end issue fills it.
