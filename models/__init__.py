"""semworld's models: the 4-tensor predictor, its 1-D baseline and their presets. No files of clips, no HTTP."""
