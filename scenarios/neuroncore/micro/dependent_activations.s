# 64 dependent tiny activations (1 element per partition): each reads the previous one's output.
# NKI performance guide: 189 ns (264 scalar cycles) apart on trn1.
control: set_reg r0 value=32
loop:
scalar: activation sb.fp32[0:128]@4{1}, sb.fp32[0:128]@0{1} func=identity
scalar: activation sb.fp32[0:128]@0{1}, sb.fp32[0:128]@4{1} func=identity | control: dec_branch_nz r0 loop
control: halt
