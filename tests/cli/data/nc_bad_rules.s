# Three hardware-rule violations: SBUF overflow, a misaligned partition start, N > 512.
vector: memset sb.fp32[0:128]@196000{1024} imm=0
vector: tensor_copy sb.fp32[16:48]@0{64}, sb.fp32[0:48]@4096{64}
tensor: multiply_moving ps.fp32[0:128]@0{1024}, sb.bf16[0:128]@0{1024} start stop
control: halt
