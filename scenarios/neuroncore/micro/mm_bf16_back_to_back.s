# 64 MultiplyMoving instructions back to back: stationary 128x128 bf16, moving N=512.
# [A2]: ~512 tensor cycles (~183 ns at 2.8 GHz) each. SBUF is left zero: this is a timing micro.
tensor: load_stationary sb.bf16[0:128]@0{128} | control: set_reg r0 value=64
loop:
tensor: multiply_moving ps.fp32[0:128]@0{512}, sb.bf16[0:128]@256{512} start stop | control: dec_branch_nz r0 loop
control: halt
