# One DMA on one engine: 32 KiB from HBM onto 4 SBUF partitions (8 KiB each), bf16.
.hbm src bf16 [4, 4096] @0x0
dma0: dma sb.bf16[0:4]@0{4096}, hbm.bf16[4x4096]@0x0{4096} queue=0
control: halt
