# C[256,256] fp32 = A[256,256] @ B[256,256], A and B bf16, written by hand.
#
# The tensor engine computes out[M,N] = stationary[K,M]^T @ moving[K,N], contracting over the
# partitions. For C = A @ B (C[i,j] = sum_k A[i,k] B[k,j]) the moving operand is B as it lies in
# HBM (k on partitions, j along the free dim) and the stationary operand is A^T (k on partitions,
# i along the free dim). A^T comes in through a strided DMA: partition k reads column k of A, i.e.
# row k starts at element k (row stride 1 element) and walks 256 elements 256 apart.
#
# Tiles: K = 256 is two tiles kt of 128 partitions; M = 256 is two tiles mt of 128 (PSUM output
# partitions); N = 256 fits one multiply_moving (N <= 512, 1 KiB of fp32, inside one 2 KiB bank).
#
# SBUF, bytes within each partition:
#      0..1023   A^T, tile kt at kt*512: [128 k, 256 i] bf16
#   1024..2047   B,   tile kt at 1024 + kt*512: [128 k, 256 j] bf16
#   2048..4095   C staging, tile mt at 2048 + mt*1024: [128 i, 256 j] fp32
# PSUM: tile mt accumulates in bank mt (byte mt*2048).
#
# Registers: r0 counts the mt loop down from 2 (dec_branch_nz), r1 = mt drives the dynamic
# offsets. Semaphores: s0 counts the four input DMAs, s1 the two output DMAs. Ordering between
# compute instructions (load_stationary -> multiply_moving -> tensor_copy -> dma) is the bundle
# order; DMAs run asynchronously, hence the semaphores.
.hbm a bf16 [256, 256] @0x0
.hbm b bf16 [256, 256] @0x20000
.hbm c fp32 [256, 256] @0x40000

# A^T tiles: kt=0 reads columns 0..127 of A (from byte 0), kt=1 columns 128..255 (from byte 256).
dma0: dma sb.bf16[0:128]@0{256}, hbm.bf16[128x1]@0x0{256:256} signal=s0 | dma1: dma sb.bf16[0:128]@512{256}, hbm.bf16[128x1]@0x100{256:256} queue=1 signal=s0 | control: set_reg r0 value=2
# B tiles: rows 0..127 and 128..255 of B.
dma0: dma sb.bf16[0:128]@1024{256}, hbm.bf16[128x256]@0x20000{256} queue=2 signal=s0 | dma1: dma sb.bf16[0:128]@1536{256}, hbm.bf16[128x256]@0x30000{256} queue=3 signal=s0 | control: set_reg r1 value=0
sync: sem_wait s0 value=4
mloop:
# Stationary = A^T[kt, mt*128 .. mt*128+127]: 128 elements from byte kt*512 + mt*256.
tensor: load_stationary sb.bf16[0:128]@0+r1*256{128}
tensor: multiply_moving ps.fp32[0:128]@0+r1*2048{256}, sb.bf16[0:128]@1024{256} start
tensor: load_stationary sb.bf16[0:128]@512+r1*256{128}
tensor: multiply_moving ps.fp32[0:128]@0+r1*2048{256}, sb.bf16[0:128]@1536{256} stop
vector: tensor_copy sb.fp32[0:128]@2048+r1*1024{256}, ps.fp32[0:128]@0+r1*2048{256}
# Rows mt*128 .. mt*128+127 of C: 128 x 256 x 4 bytes = 131072 bytes per tile.
dma0: dma hbm.fp32[128x256]@0x40000+r1*131072{256}, sb.fp32[0:128]@2048+r1*1024{256} signal=s1
control: add_reg r1 value=1
control: dec_branch_nz r0 mloop
sync: sem_wait s1 value=2
control: halt
