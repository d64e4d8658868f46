# Waits for a semaphore nothing will ever signal.
sync: sem_wait s3 value=1
control: halt
