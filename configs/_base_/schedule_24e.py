# AdamW with a 10x lower backbone LR; linear warmup then cosine, stepped per iteration.
# LR is for a total batch of 16 images (8 GPUs x 2); scale linearly with the total batch.
optimizer = dict(lr=2e-4, weight_decay=0.05, backbone_lr_mult=0.1, betas=[0.9, 0.999])
scheduler = dict(warmup_steps=500, warmup_ratio=0.001, min_lr_ratio=0.01)
trainer = dict(
    max_epochs=24,
    accelerator="auto",
    devices="auto",
    precision="bf16-mixed",
    gradient_clip_val=35.0,
    log_every_n_steps=50,
    check_val_every_n_epoch=4,
)
seed = 0
