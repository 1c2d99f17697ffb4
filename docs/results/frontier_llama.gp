set terminal svg size 1000,600 dynamic background rgb 'white'
set output 'frontier_llama.svg'
set title 'llama: peak against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key top right noenhanced
set offsets graph 0.05, graph 0.05, graph 0.08, graph 0.08
plot 'frontier_llama.dat' index 0 using 1:2 with lp pt 5 ps 1.4 lc rgb '#d62728' title 'torch.compile, activation_memory_budget X', '' index 0 using 1:2:3 with labels offset 1.2,0.6 font ',9' notitle, 'frontier_llama.dat' index 1 using 1:2 with lp pt 7 ps 1.4 lc rgb '#1f77b4' title 'mutwo held to the compile:X peak', '' index 1 using 1:2:3 with labels offset 1.2,0.6 font ',9' notitle, 'frontier_llama.dat' index 2 using 1:2 with p pt 9 ps 2 lc rgb '#2ca02c' title 'mutwo, lowest', '' index 2 using 1:2:3 with labels offset 1.2,0.6 font ',9' notitle
set terminal pngcairo size 1000,600 background rgb 'white'
set output 'frontier_llama.png'
set title 'llama: peak against step time (NVIDIA H200)' noenhanced
set xlabel 'step time (ms)'
set ylabel 'peak allocated (MiB)'
set grid
set key top right noenhanced
set offsets graph 0.05, graph 0.05, graph 0.08, graph 0.08
plot 'frontier_llama.dat' index 0 using 1:2 with lp pt 5 ps 1.4 lc rgb '#d62728' title 'torch.compile, activation_memory_budget X', '' index 0 using 1:2:3 with labels offset 1.2,0.6 font ',9' notitle, 'frontier_llama.dat' index 1 using 1:2 with lp pt 7 ps 1.4 lc rgb '#1f77b4' title 'mutwo held to the compile:X peak', '' index 1 using 1:2:3 with labels offset 1.2,0.6 font ',9' notitle, 'frontier_llama.dat' index 2 using 1:2 with p pt 9 ps 2 lc rgb '#2ca02c' title 'mutwo, lowest', '' index 2 using 1:2:3 with labels offset 1.2,0.6 font ',9' notitle
