/* Empty: nccl.h only includes it (used by regenerate.sh only). */
