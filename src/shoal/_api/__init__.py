"""What users write: environments, tasks, resources, images, pod templates, cache, ctx."""
