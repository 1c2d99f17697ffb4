set terminal svg size 1400,650 dynamic background rgb 'white'
set output 'pareto_resnet-152_64.svg'
set title 'resnet-152, batch 64: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_resnet-152_64.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (11503 MiB, 71.4 ms)', 'pareto_resnet-152_64.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (4584 MiB, 191.7 ms)', 'pareto_resnet-152_64.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (11491 MiB, 68.9 ms)', 'pareto_resnet-152_64.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (11491 MiB, 66.0 ms)', 'pareto_resnet-152_64.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (4510 MiB, 77.9 ms)', 'pareto_resnet-152_64.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (4492 MiB, 75.2 ms)'
set terminal pngcairo size 1400,650 background rgb 'white'
set output 'pareto_resnet-152_64.png'
set title 'resnet-152, batch 64: peak memory against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key outside right top vertical maxrows 60 font ',10' noenhanced
set offsets graph 0.05, graph 0.05, graph 0.1, graph 0.1
plot 'pareto_resnet-152_64.dat' index 0 using 3:2 with points pt 5 ps 1.6 lc rgb '#1f77b4' title 'PyTorch eager (11503 MiB, 71.4 ms)', 'pareto_resnet-152_64.dat' index 1 using 3:2 with points pt 5 ps 1.6 lc rgb '#ff7f0e' title 'PyTorch ckpt (4584 MiB, 191.7 ms)', 'pareto_resnet-152_64.dat' index 2 using 3:2 with points pt 7 ps 1.6 lc rgb '#2ca02c' title 'mutwo baseline (11491 MiB, 68.9 ms)', 'pareto_resnet-152_64.dat' index 3 using 3:2 with points pt 7 ps 1.6 lc rgb '#d62728' title 'mutwo baseline-cuda-graph (11491 MiB, 66.0 ms)', 'pareto_resnet-152_64.dat' index 4 using 3:2 with points pt 7 ps 1.6 lc rgb '#9467bd' title 'mutwo per-layer (CUDA graph) (4510 MiB, 77.9 ms)', 'pareto_resnet-152_64.dat' index 5 using 3:2 with points pt 7 ps 1.6 lc rgb '#8c564b' title 'mutwo mutwo (CUDA graph) (4492 MiB, 75.2 ms)'
